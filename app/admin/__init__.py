"""Services behind the admin routes that are more than a call into one other service."""
