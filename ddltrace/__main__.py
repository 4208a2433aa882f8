from ddltrace.cli import command

command()
