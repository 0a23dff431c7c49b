"""paragrade runners: grading engine, sandboxes, worker entry point."""
