"""Jobs run against a cluster through its public API: the demo (``make demo``) and the
applications' deploy-and-run (``nearfaas apps``). They sit above the launcher and the client,
and below the CLI, which only parses arguments and calls them."""
