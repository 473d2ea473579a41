"""Self-preference net of quality: the cross-judge, third-party-anchored and verifiable-answer estimators
(net_bias.py runs them all into self_bias.csv)."""
