"""Python AST of a @T.prim_func -> tile IR."""
