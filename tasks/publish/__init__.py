"""After the measurements: validate the tables, archive the run, keep the digest catalog."""
