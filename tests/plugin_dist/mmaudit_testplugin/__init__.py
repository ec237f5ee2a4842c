"""mmaudit's test plugin: one file per extension, each found by its entry point."""
