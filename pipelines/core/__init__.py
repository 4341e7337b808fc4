"""What every stage of the build shares: the base below the stages, importing only the
foundation (imageshards/).

    counters.py  what the steps count: Beam counters, and live counts for the local display
"""
