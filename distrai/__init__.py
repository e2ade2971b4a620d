"""DisTrAI: decentralized training of language models on a Bittensor-style subnet."""
