"""Reward functions added to env rewards: shaped, intrinsic and information-gain rewards."""
