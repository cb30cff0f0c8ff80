"""Looking at a scored corpus: reading it back, the terminal summary, the HTML report."""
