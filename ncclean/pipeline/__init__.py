"""The commands' work, one module each: read, compute through the library's layers, write, and
return a summary. :mod:`ncclean.api` checks the options and calls one function here."""
