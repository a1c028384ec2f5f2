# Provision LibreChat knowledge bases from a plan: a thin wrapper around provision_knowledge_bases.py.
# Usage:  scripts\provision-knowledge-bases.ps1 plan.yaml [--skip-uploads] [--state PATH] [--json PATH]
# Credentials: set LIBRECHAT_ADMIN_EMAIL and LIBRECHAT_ADMIN_PASSWORD, or answer the prompts.
# Uses the project's .venv when it exists (scripts/serve or scripts/test create it), else python on PATH
# (which then needs: pip install -e .).
$ErrorActionPreference = 'Stop'
$root = Split-Path -Parent $PSScriptRoot
$python = $null
foreach ($candidate in @((Join-Path $root '.venv/bin/python'), (Join-Path $root '.venv/Scripts/python.exe'))) {
    if (Test-Path $candidate) { $python = $candidate; break }
}
if (-not $python) { $python = 'python' }
& $python (Join-Path $PSScriptRoot 'provision_knowledge_bases.py') @args
exit $LASTEXITCODE
