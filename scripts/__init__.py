"""scripts/ is a package so the operator scripts can import their parts (`scripts.validation`,
`scripts.provisioning`) once they have put the repository on sys.path; scripts/lib/ is not one
(its tools are run, or loaded by path, without the repository's packages)."""
