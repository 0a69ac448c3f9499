# src build fragment (included by Makefile.am)
