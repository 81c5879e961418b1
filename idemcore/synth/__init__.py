"""Synthetic data: batch streams, planted anomalies (one planter per finding), datasets and their ground truth."""
