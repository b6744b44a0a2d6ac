"""steplens: streaming step telemetry and diagnosis for large training clusters.

This package holds what the pipeline stages share (configuration) and the entry points
(`python -m steplens demo`). The stages themselves live in producers/, streams/, sinks/.
"""
