"""The `imageshards` command and its tools: the face of the package, above everything else.

Nothing in `imageshards/`, `pipelines/` or `trainer/` imports from here.
"""
