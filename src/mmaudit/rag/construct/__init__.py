"""Building a QIMG-7 benchmark: records, text pollution, image operators, regimes, checks, the mini benchmark."""
