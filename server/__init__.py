"""paragrade server (FastAPI): web pages, API, domain services and the schema; of the runners it
imports only runners.protocol."""
