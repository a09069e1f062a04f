"""The tool system: catalog, snapshots, the request gate, dispatch and results."""
