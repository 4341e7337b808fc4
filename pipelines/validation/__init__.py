"""Validating every listed input once (ValidateImages): JPEG and PNG by their structure, the
rest by a Pillow decode, failures as reasons; then, with --dedup, one of each set of identical
images. Imports the foundation, the base (pipelines/core/) and inputs/."""
