"""The `paragrade` command: engine (runners), server and student client commands together."""
