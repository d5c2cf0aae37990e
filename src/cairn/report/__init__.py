"""Reports: plots of a run and of a comparison over seeds."""
