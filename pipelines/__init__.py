"""Apache Beam pipelines of imageshards (DirectRunner locally, Dataflow at scale)."""
