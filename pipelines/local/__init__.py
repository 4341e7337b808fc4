"""What only the local runner needs: the FnApiRunner on every core (direct.py), processes started
before Beam is imported (early.py: the listing, warm workers, the tf.Transform graph process),
blocks spilled to files (spill.py) and progress across worker processes. May import the stages;
no stage imports it."""
