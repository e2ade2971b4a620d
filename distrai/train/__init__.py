"""Training core shared by miners and validators.

model (presets, from_pretrained), tokenizer (byte-level), corpus (offline text), data (token
sequences, held-out split), assignment (who trains on what), loss, step (the one training step),
optimizer (inner AdamW), state / hashing / tensorfile / sketch (committed states), inner (the
inner loop), replay (the validator's recomputation), outer (DiLoCo's outer step), distill
(teacher loss), evaluate (held-out loss), determinism (what makes steps reproducible).
"""
