"""Data from elsewhere: the original's bootstrap and import tools, data this store did not
write (old backups, the original's files, Qdrant payloads), and repair from a shared Qdrant."""
