"""Layer 6: fitting a depth: moments, covariance, directions, leaf summaries."""
