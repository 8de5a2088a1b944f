"""Is offloading worth it (issue 20): the thesis's cost-benefit metrics and its data-availability model."""
