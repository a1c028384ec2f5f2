"""Clients of the services we call: embedding providers, the blob store."""
