"""The bonus notebook's nine multi-head implementations (mha-implementations), as the notebook writes them."""
