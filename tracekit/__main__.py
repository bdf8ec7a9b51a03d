"""``python -m tracekit`` runs the command line."""

from tracekit.cli.main import main

main()
