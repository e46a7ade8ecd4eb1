"""Lowering: scheduled Fusion IR to kernel IR (structured statements, no C text)."""
