from ncclean.cli import run

run()
