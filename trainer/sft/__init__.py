"""Supervised fine-tuning: expert transcripts rendered as the gateway records them, and the SFT steps on the trainer."""
