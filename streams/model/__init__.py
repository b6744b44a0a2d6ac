"""What a job should achieve: fleet reference models and the expected step time and memory (issue #44).

Pure: fitting, prediction and forecasting over columns; the stages that feed them live elsewhere.
"""
