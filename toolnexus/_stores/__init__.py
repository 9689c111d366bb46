"""Where trees and transcripts are kept: conversation stores and a tree's rows in a SQL state store."""
