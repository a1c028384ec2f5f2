"""Tests for the LibreChat overlay (patches/librechat) and scripts/apply_patches.py."""
