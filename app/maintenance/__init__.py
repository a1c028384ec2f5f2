"""Named background maintenance: each task a plain async callable with an interval and a status."""
