"""The workspace: logical paths, roots per scene, the on-disk store and read state."""
