"""The byte layer: every read, local or remote, positioned and identity-checked (no memory maps);
zip directories as torch reads them; a storage's bytes (`ByteSource`); remote files by range requests."""
