"""dlrmbench: embedding."""
