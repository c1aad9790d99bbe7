"""Inference-only code: what an export runs besides the Keras model.

packed.py (the export's packed encoder over `models.packed_backbone`),
quantization.py (int8 matmuls), int8_calibration.py (layer-by-layer
calibration and its options), int8_export.py (calibration text, probes and
the int8 flags of the export commands), onednn.py (oneDNN ops without a
Python wrapper) and control_flow.py. Only `export` and `configurables` import it directly (training reaches it
through the export it writes).
"""
