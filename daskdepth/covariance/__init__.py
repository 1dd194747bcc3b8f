"""Layer 5: covariance estimators (sample, shrinkage, MCD), each owned once."""
