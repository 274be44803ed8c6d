"""`python -m elo_per_token …` is the `ept` command."""

from elo_per_token.ept.cli import main

if __name__ == "__main__":
    main()
