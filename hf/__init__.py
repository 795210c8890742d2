"""The transformers face: export to a Hugging Face folder (hf.export), its remote code (hf.modeling_looped) and the
lm-evaluation-harness adapter (hf.harness). Nothing on the reading path imports this package."""
