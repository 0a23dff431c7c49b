"""paragrade server (FastAPI): built by the server issue; it imports only runners.protocol."""
