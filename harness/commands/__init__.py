"""The command line: one module per `harness` command, each parsing its flags, calling the library and printing."""
