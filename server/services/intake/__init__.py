"""What students hand in: the upload rules, storage, quota and lateness (`submissions`), and
similarity between submissions (`similarity`)."""
