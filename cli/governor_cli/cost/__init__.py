"""What running the governor costs: the measurement on the emulator (``measure``) behind ``governor cost``.

The model it writes (``governor/footprint/measured.py``) and the price table live in the runtime package, so the
report prices its own period with the same figures; this package only measures.
"""
