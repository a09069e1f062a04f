"""Pure values of the tool system: ids, arguments, descriptors, results, profiles.

Nothing in this package does I/O or imports from the rest of the project.
"""
