"""`python -m nearfaas.cli`."""

from nearfaas.cli import main

if __name__ == "__main__":
    main()
