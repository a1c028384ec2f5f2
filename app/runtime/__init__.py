"""What the service runs on the machine besides itself: the embedded PostgreSQL server."""
