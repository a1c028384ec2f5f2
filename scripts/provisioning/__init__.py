"""The parts of scripts/provision_knowledge_bases.py: the plan and the files it names (plan), what
earlier runs did (state), LibreChat's HTTP API with retries (librechat), and the run that provisions
and verifies (provisioner). The script itself reads the command line and the credentials."""
