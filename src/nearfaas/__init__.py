"""nearfaas: run each function where its data lives, and project it onto hardware we lack."""

__version__ = "0.1.0"
