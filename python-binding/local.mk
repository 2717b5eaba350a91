# python-binding
