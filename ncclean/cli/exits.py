"""The exit codes of every command (:func:`ncclean.cli.main` maps errors to them)."""

EXIT_OK, EXIT_FAILED_GATE, EXIT_BAD_INPUT, EXIT_INTERNAL = 0, 1, 2, 3
EXIT_CODES = ("Exit codes: 0 success; 1 a check that failed (check's FAIL only); 2 bad input or "
              "usage, a full disk or no permission; 3 an internal error (a bug; please report "
              "it); 130/143 interrupted (SIGINT/SIGTERM).")
"""The contract, as the help texts say it."""
