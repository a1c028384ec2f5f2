"""The parts of scripts/validate_deployment.py: who owns what and their tokens (inventory), the
probes' rules (checks), which probes to send (planning), the generated corpus (seeding) and
LibreChat's catalogue (catalogue). The script itself parses the command line and runs them."""
