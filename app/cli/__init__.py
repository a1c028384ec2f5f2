"""Command-line entry points that build the whole application (they may import app.main)."""
