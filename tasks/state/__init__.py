"""A run's state: its storage (a directory or an S3 prefix), documents, table partitions and schemas, the local S3 server."""
